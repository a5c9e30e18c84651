module github.com/asyncgate/asyncgate/sdk/plugin

go 1.26.0
