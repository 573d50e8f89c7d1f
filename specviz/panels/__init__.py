"""The Gradio layer's panels: each module builds one panel's widgets and wires its own events (page.py builds the
page from them; app.py launches it). Every handler goes through panels.visitor_handler; the logic lives below, in
specviz.lab (a session's state, one module per tab) and specviz.render (what the page shows of it)."""
