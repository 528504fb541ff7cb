module txnsim-conform/franz-go

go 1.26.0

require txnsim-conform/adapter v0.0.0

replace txnsim-conform/adapter => ../go-adapter

require github.com/twmb/franz-go v1.22.3

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
)
