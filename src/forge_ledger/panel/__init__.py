"""Who takes part in a session, and whether a run with them can work, known before anything is
recorded: participants files and model lists (:mod:`.participants_file`), and the checks made
before a session starts or takes new participants (:mod:`.preflight`).

The application layer (``run``, ``resume --add``) and study plans (each panel is a
participants file) read panels here. The package itself imports nothing, so a caller loads
only the module it uses (the pre-flight checks reach litellm only when they run).
"""
