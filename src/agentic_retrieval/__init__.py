"""agentic-retrieval: agentic retrieval as a LangGraph graph you own."""
