"""One exception tree; the CLI catches `LaunchpadError` once and prints it without a traceback.

    LaunchpadError                      exit 1 unless a subclass says otherwise
    ├── BadInput                        exit 2: the user can fix it by editing what they typed
    │   ├── RecipeError                 one line per problem: "<file>: <field>: <what> (<fix>)"
    │   ├── ConfigError                 hosts.yaml, config.yaml, ...
    │   └── JobNotFound
    ├── NoFeasibleOffer                 the planner rejected every offer (reasons attached)
    ├── ProviderError                   a provider API said no; `provider` names which
    │   ├── NotConfigured               check() failed: no credentials, SDK missing, ...
    │   ├── AuthError                   credentials rejected: blocks the whole provider
    │   ├── NoCapacity                  try the next offer; `scope` says how much to skip
    │   │   └── QuotaExceeded
    │   ├── TransientError              worth retrying (tenacity) before giving up
    │   ├── NotYetTerminated            teardown accepted but not finished: poll again
    │   └── TeardownIncomplete          some instances may still run (named); `down` again
    ├── StorageError                    object store I/O
    │   ├── StorageUnavailable          unreachable / throttled / dropped mid-transfer: worth retrying
    │   └── IncompleteCheckpoint        missing/invalid manifest or checksum mismatch
    ├── StateError                      the local state database
    ├── JobBusy                         another launchpad process drives this job right now
    ├── JobStopped                      `launchpad down` tore the job down while this command drove it
    ├── PreflightFailed                 a multi-node job's nodes failed the preflight (clock skew, the
    │                                   all-reduce probe; bandwidth under the promise with --strict)
    └── JobFailed                       the trainer exited non-zero; `.log_tail` has its last lines
"""

from __future__ import annotations


class LaunchpadError(Exception):
    """Base of every error launchpad raises on purpose."""

    exit_code = 1

    def __init__(self, message: str = "", *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class BadInput(LaunchpadError):
    exit_code = 2


class RecipeError(BadInput):
    """A recipe failed validation. `problems` holds one complete line each."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class ConfigError(BadInput):
    pass


class JobNotFound(BadInput):
    pass


class NoFeasibleOffer(LaunchpadError):
    def __init__(self, message: str, rejected: list | None = None):
        super().__init__(message)
        self.rejected = rejected or []


class ProviderError(LaunchpadError):
    def __init__(self, message: str = "", *, provider: str | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.provider = provider


class NotConfigured(ProviderError):
    pass


class AuthError(ProviderError):
    pass


class NoCapacity(ProviderError):
    """No capacity for this offer. `scope` is what the planner should stop trying:
    "offer", "zone", "region" or "provider"."""

    def __init__(self, message: str = "", *, provider: str | None = None, scope: str = "offer"):
        super().__init__(message, provider=provider)
        self.scope = scope


class QuotaExceeded(NoCapacity):
    pass


class TransientError(ProviderError):
    pass


class NotYetTerminated(ProviderError):
    pass


class StorageError(LaunchpadError):
    pass


class StorageUnavailable(StorageError):
    """The store could not be reached, throttled us, or a transfer broke off: retrying may succeed."""


class IncompleteCheckpoint(StorageError):
    pass


class StateError(LaunchpadError):
    pass


class JobFailed(LaunchpadError):
    def __init__(self, message: str, *, exit_code_of_trainer: int | None = None, log_tail: list[str] | None = None):
        super().__init__(message)
        self.trainer_exit_code = exit_code_of_trainer
        self.log_tail = log_tail or []


class TeardownIncomplete(ProviderError):
    """Some instances could not be torn down (or confirmed gone); they may still bill."""

    def __init__(self, message: str, *, gone: list[str], left: list[str]):
        super().__init__(message)
        self.gone, self.left = gone, left


class JobBusy(LaunchpadError):
    pass


class JobStopped(LaunchpadError):
    pass


class PreflightFailed(LaunchpadError):
    """A multi-node job's nodes are not fit to train together (launchpad.preflight); the job fails before
    its trainer starts. `report` holds what was measured up to the failure (a PreflightReport), if anything."""

    def __init__(self, message: str, *, hint: str | None = None, report=None):
        super().__init__(message, hint=hint)
        self.report = report
