"""Refusals and faults of versioned documents (``ctrlrun.documents``)."""

from __future__ import annotations

from typing import Any

from ctrlrun.errors.core import InvalidArgument, Refused


class VersionConflict(Refused):
    """A compare-and-swap save was based on a version that is no longer the stored one.

    Nothing was written. ``current_version`` is the stored version the refusal was decided
    against; ``expected_version`` the one the save was based on.
    """

    doc_id: str
    current_version: int
    expected_version: int | None

    def __init__(
        self,
        message: str,
        *,
        doc_id: str,
        current_version: int,
        expected_version: int | None = None,
    ) -> None:
        super().__init__(
            message,
            reason="version_conflict",
            doc_id=doc_id,
            current_version=current_version,
            expected_version=expected_version,
        )


class DocumentNotFound(Refused):
    """No document has this id."""

    doc_id: str

    def __init__(self, message: str, *, doc_id: str) -> None:
        super().__init__(message, reason="not_found", doc_id=doc_id)


class DocumentExists(Refused):
    """A create named an id that is already taken; nothing was written."""

    doc_id: str
    current_version: int

    def __init__(self, message: str, *, doc_id: str, current_version: int) -> None:
        super().__init__(
            message, reason="document_exists", doc_id=doc_id, current_version=current_version
        )


class MergeConflict(Refused):
    """A three-way merge met changes it cannot combine; ``keys`` names them. Nothing changed."""

    keys: tuple[str, ...]

    def __init__(self, message: str, *, keys: tuple[str, ...]) -> None:
        super().__init__(message, reason="merge_conflict", keys=tuple(keys))


class DocumentTooLarge(InvalidArgument):
    """A document's canonical content (or a request body) is over the size limit, in bytes."""

    size: int
    limit: int

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message, size=size, limit=limit)


class PreconditionRequired(InvalidArgument):
    """A save named no version to compare against (HTTP 428); a blind overwrite is refused."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)
