"""The transaction of one write (``transaction``: begin, commit, roll back on a conflict or a
failure) and the pure conflict rules (``conflicts``)."""
