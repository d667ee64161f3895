"""Optional adapters to the frameworks agents already use. Each module imports its framework;
``import ctrlrun`` imports none of them."""
