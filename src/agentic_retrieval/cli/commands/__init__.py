"""One module per command of ``agentic-retrieval``; ``cli/app.py`` registers them."""
