"""Text helpers."""


def shout(text):
    """The text in capitals, with an exclamation mark."""
    return text.upper() + "!"


def whisper(text):
    return text.lower()
