"""Deployment: exporting a trained run to other inference engines (``ct2``: CTranslate2)."""
