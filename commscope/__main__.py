from commscope.cli import main

main()
