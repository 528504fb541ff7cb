module txnsim-conform/kafka-go

go 1.26.0

require txnsim-conform/adapter v0.0.0

replace txnsim-conform/adapter => ../go-adapter

require github.com/segmentio/kafka-go v0.4.51

require (
	github.com/klauspost/compress v1.15.9 // indirect
	github.com/pierrec/lz4/v4 v4.1.15 // indirect
)
