module github.com/anvilproj/anvil

go 1.26
