module github.com/foldhost/foldhost

go 1.26.8
