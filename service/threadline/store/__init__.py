"""Long-term memory: LangGraph ``BaseStore`` implementations of threadline."""
