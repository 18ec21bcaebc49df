"""launchpad: fine-tune LLMs on whichever GPU provider fits the job.

Importing this package is cheap on purpose: no cloud SDK, no torch (see launchpad.train and providers/*).
"""

__version__ = "0.1.0"
