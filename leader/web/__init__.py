"""The leader's web pages: server-rendered HTML (Jinja2), charts drawn by the vendored uPlot, a little vanilla JS."""
