"""Rendering: planned images and their locks into build contexts from the Jinja templates (contexts), the
names those inputs make (tags), what an image is checked against inside (expected: expected.json), locked images
carrying both (locked), contexts written to disk (output), and the wheelhouse's index pages (wheelhouse). It may import imagegen.core, engine, matrix and locking."""
