"""Human-facing outputs derived from a Results document: terminal table and charts."""
