"""The only code that touches PerfDB collections and GridFS."""
