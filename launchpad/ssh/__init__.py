"""SSH plumbing for providers whose instances are "a Linux machine you SSH into".

Modules (each imports paramiko only inside functions or at its own import, never from here, so that
`import launchpad.ssh` and the host-side helper `python -m launchpad.ssh.remote` work without it):

    target.py      SSHTarget: where and as whom to connect; ~/.ssh/config aliases and ProxyJump resolved
    keys.py        ed25519 key generation (files 0600), loading, OpenSSH-style fingerprints
    hostkeys.py    launchpad's own known_hosts: pinned keys, trust-on-first-use, changed key = hard error
    connection.py  SSHConnection, the SSH `launchpad.transport.CommandRunner`: bounded connect retries,
                   keepalives, argv-only remote commands, files over SFTP (exec channels without it)
    remote.py      runs ON the host (stdlib + launchpad.agent): launch the agent, progress, tail, stop
    venv_setup.py  runs ON the host through `python -` before launchpad is installed there: the venv

Security rules every module keeps: remote commands are argv lists joined with `shlex.join` (never a
string a caller built), values a recipe controls travel as data (argv elements or stdin), secrets only
over stdin, host keys are never auto-added silently, private keys never leave this machine or a log.
"""
