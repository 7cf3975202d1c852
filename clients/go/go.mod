module onceq

go 1.19
