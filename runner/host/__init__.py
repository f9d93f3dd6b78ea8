"""The worker host: trusted code that runs on the machine, outside every container. ``worker`` claims jobs,
hands them to an executor, checks ``results.json`` against the job and stores it; ``containers`` runs the
stages as sandboxed containers (``sandbox``: the limits every container gets); ``images`` builds the
runner image and each submission's edit image, whose first step ``edit_base`` strips every benchmark text.
Submitted code never runs in these processes: it runs only inside the edit container, and the host meets
the stages only through :mod:`knowgic.runner.stages.contract` (files in the job folder) and their exit
status.
"""
