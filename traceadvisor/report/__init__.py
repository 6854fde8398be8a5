"""Reports: the analysis as data (``summary``), and its renderings (JSON, text, Markdown)."""
