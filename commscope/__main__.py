from commscope.cli import entry

entry()
