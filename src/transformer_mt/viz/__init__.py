"""Pictures: attention heatmaps, training curves and the explorer's interactive figures.

Arrays and captured attention in, matplotlib (Plotly, bertviz) figures out; writing files is
``heatmaps``'s job, for the end of training and ``scripts/plot_alignment.py``.
"""
