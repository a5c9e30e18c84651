module github.com/asyncgate/asyncgate/sdk/worker

go 1.22
