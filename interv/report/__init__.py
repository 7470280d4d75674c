"""Consumers of results: text, tables and plots. Nothing here touches a model."""
