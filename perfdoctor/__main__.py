from perfdoctor.cli import program

program()
