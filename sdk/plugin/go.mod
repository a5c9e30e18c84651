module github.com/asyncgate/asyncgate/sdk/plugin

go 1.24
