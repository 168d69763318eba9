from imagegen.cli import main

main()
