"""The Gradio layer's panels: each module builds one panel's widgets and wires its own events; app.py puts them
together. Logic lives below (specviz.engine, specviz.lab, specviz.render); a panel validates what a visitor sends and shows."""
