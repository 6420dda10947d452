module github.com/modref/modref

go 1.26

require (
	github.com/google/go-cmp v0.7.0
	github.com/sbinet/npyio v0.6.0
	github.com/viterin/vek v0.4.3
	golang.org/x/sys v0.11.0
	gonum.org/v1/gonum v0.17.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/chewxy/math32 v1.10.1 // indirect
	github.com/viterin/partial v1.1.0 // indirect
	golang.org/x/exp v0.0.0-20230817173708-d852ddb80c63 // indirect
)
