"""The attention explorer: ``session.Explorer`` (no web code) and its Gradio page (``explorer``).

Needs the ``app`` extra (Gradio, Plotly): ``pip install -e ".[app]"``.
"""
