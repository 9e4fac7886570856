"""Corpora, the tokenizer and batching; imports nothing from the model."""
