module github.com/asyncgate/asyncgate/sdk/client

go 1.22
