"""One Backend interface (base), one implementation per target: native, portable (torch)."""
