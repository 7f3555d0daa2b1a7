"""Code mode: one run_code tool whose Python runs in Monty workers and calls inner tools."""
