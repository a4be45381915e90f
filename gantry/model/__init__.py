"""The model layer: the OpenAI-compatible client, its wire types, tool-call salvage, images.

This file imports nothing: import from the modules themselves, so that whoever needs only
the message types (every channel, the session store) does not load httpx with client.py.
"""
