"""The report service, ``apex=report`` (RFC 3340 section 6.2): ``python -m services.report``.

Relays call ``ReportService.Report`` after processing a ``statusRequest`` option (RFC 3340
section 5.1); the service builds the ``statusResponse`` data element and originates it as
``apex=report@DOMAIN`` through a relay's ``RelayService.Submit``. It keeps no state.

Five files, as in every service: ``settings.py`` (environment to a frozen object),
``app.py`` (composition root), ``servicer.py`` (operations and the gRPC servicers),
``http.py`` (admin HTTP app) and ``__main__.py`` (signals and the run loop).
"""
