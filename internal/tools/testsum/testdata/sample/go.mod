module sample

go 1.24
