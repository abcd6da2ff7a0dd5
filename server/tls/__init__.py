"""TLS for the one listener of an instance (``wss://`` and ``https://`` on the web port).

Modules, lowest first (this package file imports none of them, so that the configuration
loader can use the lowest without importing the rest):

    errors       the exceptions: which file is wrong and why
    certificate  what a PEM certificate says (subject, issuer, validity, fingerprint) and
                 the canonical RFC 4514 form of a distinguished name
    context      server contexts from the configured files: TLS 1.2 minimum, ECDHE with
                 AEAD ciphers, client certificates verified against the CA when asked
    listener     the live side: the active certificate pair, reloads that new handshakes
                 pick up (existing connections keep theirs), the expiry watch

``spool.server.config`` validates the files through ``context`` at start-up, so a bad
certificate is a configuration error at the element that names it.
"""
