# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_herald_global_optspecs
    string join \n h/help V/version
end

function __fish_herald_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_herald_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_herald_using_subcommand
    set -l cmd (__fish_herald_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c herald -n "__fish_herald_needs_command" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_needs_command" -s V -l version -d 'Print version'
complete -c herald -n "__fish_herald_needs_command" -f -a "serve" -d 'Run the appliance (built-in defaults when no config is given)'
complete -c herald -n "__fish_herald_needs_command" -f -a "check-config" -d 'Validate a config file and print every problem with its key path'
complete -c herald -n "__fish_herald_needs_command" -f -a "openapi" -d 'Print the OpenAPI 3.1 document of the API and of the catalog\'s webhooks'
complete -c herald -n "__fish_herald_needs_command" -f -a "migrate" -d 'Apply the cluster database\'s schema (storage.backend = "postgres") and exit'
complete -c herald -n "__fish_herald_needs_command" -f -a "copy" -d 'Copy a stopped single-node store into an empty cluster database'
complete -c herald -n "__fish_herald_needs_command" -f -a "backup" -d 'Write an online backup of the running herald\'s store (GET /v1/backup) to a file'
complete -c herald -n "__fish_herald_needs_command" -f -a "restore" -d 'Restore a backup archive into an empty store, or check an archive with --check'
complete -c herald -n "__fish_herald_needs_command" -f -a "receive" -d 'A receiver for trying herald out: verifies signatures and prints what arrives'
complete -c herald -n "__fish_herald_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c herald -n "__fish_herald_using_subcommand serve" -l config -d 'The TOML config file' -r -F
complete -c herald -n "__fish_herald_using_subcommand serve" -l dev -d 'Allow http:// and loopback targets and skip endpoint verification (local trials only)'
complete -c herald -n "__fish_herald_using_subcommand serve" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand check-config" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand openapi" -l config -d 'The TOML config file (its catalog fills the webhooks; built-in defaults without)' -r -F
complete -c herald -n "__fish_herald_using_subcommand openapi" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand migrate" -l config -d 'The TOML config file naming the database' -r -F
complete -c herald -n "__fish_herald_using_subcommand migrate" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand copy" -l from -d 'The store: sled:PATH (the data directory)' -r
complete -c herald -n "__fish_herald_using_subcommand copy" -l to -d 'The database: postgres:URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE)' -r
complete -c herald -n "__fish_herald_using_subcommand copy" -l ca-file -d 'PEM certificates of the CA that signed the database\'s certificate' -r -F
complete -c herald -n "__fish_herald_using_subcommand copy" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand backup" -l config -d 'The TOML config file: herald\'s address (server.listen) and its admin token' -r -F
complete -c herald -n "__fish_herald_using_subcommand backup" -l out -d 'The archive to write (mode 0600, renamed into place when complete); `-` for stdout' -r -F
complete -c herald -n "__fish_herald_using_subcommand backup" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand restore" -l config -d 'The TOML config file whose storage receives the archive' -r -F
complete -c herald -n "__fish_herald_using_subcommand restore" -l to -d 'The store instead of the config\'s: sled:PATH or postgres:URL' -r
complete -c herald -n "__fish_herald_using_subcommand restore" -l ca-file -d 'PEM certificates of the CA that signed the database\'s certificate (with --to postgres:URL)' -r -F
complete -c herald -n "__fish_herald_using_subcommand restore" -l check -d 'Only verify the archive (format, every checksum, counts); needs no store'
complete -c herald -n "__fish_herald_using_subcommand restore" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand receive" -l listen -d 'Address to listen on, such as 127.0.0.1:9000' -r
complete -c herald -n "__fish_herald_using_subcommand receive" -l secret -d 'The endpoint\'s signing secret (whsec_...)' -r
complete -c herald -n "__fish_herald_using_subcommand receive" -s h -l help -d 'Print help'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "serve" -d 'Run the appliance (built-in defaults when no config is given)'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "check-config" -d 'Validate a config file and print every problem with its key path'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "openapi" -d 'Print the OpenAPI 3.1 document of the API and of the catalog\'s webhooks'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "migrate" -d 'Apply the cluster database\'s schema (storage.backend = "postgres") and exit'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "copy" -d 'Copy a stopped single-node store into an empty cluster database'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "backup" -d 'Write an online backup of the running herald\'s store (GET /v1/backup) to a file'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "restore" -d 'Restore a backup archive into an empty store, or check an archive with --check'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "receive" -d 'A receiver for trying herald out: verifies signatures and prints what arrives'
complete -c herald -n "__fish_herald_using_subcommand help; and not __fish_seen_subcommand_from serve check-config openapi migrate copy backup restore receive help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
