"""Text from outside, at the two edges where it is dangerous: bounded before it is parsed
(:mod:`.bounded_yaml`, the one YAML loader) and escaped before a terminal shows it
(:mod:`.terminal_text`).

Model answers, YAML files and store contents are untrusted (DESIGN §6). These modules import
nothing of ours but the error tree, so every layer above may call them; the package itself
imports nothing, so each caller loads only the half it uses.
"""
