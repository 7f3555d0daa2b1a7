"""SQLite transcripts, runs and the tool-call audit, and the commands that read them."""
