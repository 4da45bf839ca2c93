"""Report renderers: report.json / report.md / report.html files, the Markdown and HTML renderers, Q-Guide sections, SVG charts."""

__all__: list[str] = []
