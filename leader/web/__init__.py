"""The leader's web pages: server-rendered HTML (Jinja2), server-side SVG charts, a little vanilla JS."""
