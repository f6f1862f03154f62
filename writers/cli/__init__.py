"""The ``lakebraid`` command (``main``) and ``make demo`` (``demo``)."""
