module txnsim-conform/adapter

go 1.26.0
