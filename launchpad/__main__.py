from launchpad.cli import main

main()
