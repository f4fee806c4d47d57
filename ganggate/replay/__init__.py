"""The embedded demo and trace replay: what gang admission buys, in numbers."""
