from launchpad.agent.watchdog import IdleWatchdog, gpu_utilization, login_sessions


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_idle_only_when_nothing_runs_and_nobody_is_logged_in():
    clock, trainer, sessions, gpu = Clock(), [True], [0], [None]
    dog = IdleWatchdog(60, trainer_running=lambda: trainer[0], sessions=lambda: sessions[0], gpu=lambda: gpu[0],
                       clock=clock)
    assert dog.idle_for() == 0 and dog.reason_busy == "a trainer is running"
    trainer[0] = False
    assert dog.idle_for() == 0  # the idle timer starts now
    clock.now = 30
    assert dog.idle_for() == 30 and not dog.due()
    sessions[0] = 1  # someone logged in: the timer restarts
    assert dog.idle_for() == 0 and "login" in dog.reason_busy
    sessions[0] = 0
    clock.now = 40
    dog.idle_for()
    gpu[0] = 55.0  # a GPU busy outside our trainer (a notebook, say)
    assert dog.idle_for() == 0 and "GPU" in dog.reason_busy
    gpu[0] = 3.0
    dog.idle_for()
    clock.now = 101
    assert dog.due()


def test_probes_on_this_machine_do_not_fail():
    assert isinstance(login_sessions(), int)
    assert gpu_utilization() is None or gpu_utilization() >= 0
