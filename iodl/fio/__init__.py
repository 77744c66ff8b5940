"""Run fio job files with iodl and compare the numbers with fio's (`iodl fio-compare`)."""
