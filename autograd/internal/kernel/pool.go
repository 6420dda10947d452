package kernel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// op names one of the three products.
type op uint8

const (
	opNN op = iota
	opNT
	opTN
)

// parallelMinFlops is the smallest product, in multiply-adds m·k·n, that is
// shared with the worker pool; below it handing work to another goroutine
// costs more than it saves.
const parallelMinFlops = 1 << 18

// blockRows is how many rows of c one participant takes at a time. It is a
// multiple of ntRows and panelRows so that blocks cut no NT group or TN panel
// short (which would change speed, never bits).
const blockRows = 48

// job is one product shared between its caller and some workers. Each
// participant claims blocks of blockRows rows of c through next until none
// are left, so the split adapts to whoever is free, while every element is
// computed the same way whichever participant computes it.
type job struct {
	op      op
	c, a, b []float32
	m, k, n int
	blocks  int64
	next    atomic.Int64
	done    sync.WaitGroup
}

var (
	jobs = sync.Pool{New: func() any { return new(job) }}

	// scratch holds *[]float32 scratch space for the vek paths.
	scratch = sync.Pool{New: func() any { return new([]float32) }}

	startPool sync.Once
	queue     chan *job
	workers   int
)

// start launches the fixed pool: one worker per CPU besides the caller's.
func start() {
	workers = runtime.NumCPU() - 1
	queue = make(chan *job, 4*workers+4)
	for range workers {
		go func() {
			for j := range queue {
				j.work()
				j.done.Done()
			}
		}()
	}
}

// run computes the product op, on the caller alone when it is small and
// together with the pool otherwise.
func run(o op, c, a, b []float32, m, k, n int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c)
		return
	}
	blocks := (m + blockRows - 1) / blockRows
	helpers := min(runtime.GOMAXPROCS(0), runtime.NumCPU(), blocks) - 1
	if helpers <= 0 || m*k*n < parallelMinFlops {
		rows(o, c, a, b, m, k, n, 0, m)
		return
	}
	startPool.Do(start)
	j := jobs.Get().(*job)
	j.op, j.c, j.a, j.b, j.m, j.k, j.n = o, c, a, b, m, k, n
	j.blocks = int64(blocks)
	j.next.Store(0)
	for range helpers {
		j.done.Add(1)
		select {
		case queue <- j:
		default: // every worker is busy and the queue is full: go on without
			j.done.Done()
		}
	}
	j.work()
	j.done.Wait()
	j.c, j.a, j.b = nil, nil, nil
	jobs.Put(j)
}

// work claims and computes blocks of j until none are left.
func (j *job) work() {
	for {
		blk := j.next.Add(1) - 1
		if blk >= j.blocks {
			return
		}
		i0 := int(blk) * blockRows
		rows(j.op, j.c, j.a, j.b, j.m, j.k, j.n, i0, min(i0+blockRows, j.m))
	}
}

// rows computes rows [i0, i1) of the product o, with scratch space from
// the scratch pool for the vek paths of NN and TN.
func rows(o op, c, a, b []float32, m, k, n, i0, i1 int) {
	if o == opNT {
		rowsNT(c, a, b, k, n, i0, i1)
		return
	}
	if !useVek {
		if o == opNN {
			rowsNN(c, a, b, nil, k, n, i0, i1)
		} else {
			rowsTN(c, a, b, nil, m, k, n, i0, i1)
		}
		return
	}
	size := n
	if o == opTN {
		size += panelRows * k
	}
	p := scratch.Get().(*[]float32)
	if cap(*p) < size {
		*p = make([]float32, size)
	}
	if o == opNN {
		rowsNN(c, a, b, (*p)[:n], k, n, i0, i1)
	} else {
		rowsTN(c, a, b, (*p)[:size], m, k, n, i0, i1)
	}
	scratch.Put(p)
}
