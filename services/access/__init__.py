"""The access service, ``apex=access`` (RFC 3341): ``python -m services.access``.

Five files, as in every service: ``settings.py`` (environment to a frozen object),
``app.py`` (composition root), ``servicer.py`` (operations and the gRPC servicer),
``http.py`` (admin HTTP app) and ``__main__.py`` (signals and the run loop).
"""
