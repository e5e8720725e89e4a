module bookend.invalid/apiserver-bench

go 1.26.4
