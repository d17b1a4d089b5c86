"""Settings from the command line, for train.py and sample.py.

vkblas test program, written in the style of nanoGPT's configurator.py: not a module to import but a snippet
each script runs with exec(open(...).read()) once its defaults are set as globals. It exercises exec of Python
config files into the script's globals, ast.literal_eval and type checks. Arguments are taken in order:

    python train.py config/train_shakespeare_char.py --batch_size=8 --device=cpu

A plain argument is a Python file of assignments, run in the script's globals. `--name=value` replaces the
global `name`, which must exist; the value is read as a Python literal when it is one (8, 3e-4, True) and as a
string otherwise (cpu, out-shakespeare-char), and must have the default's type (an int is accepted for a float).
"""


def _configure(settings):
    import builtins
    import sys
    from ast import literal_eval

    for arg in sys.argv[1:]:
        if not arg.startswith("--"):
            print(f"settings from {arg}")
            with open(arg) as f:
                source = f.read()
            # builtins.compile: the scripts have a setting named compile
            exec(builtins.compile(source, arg, "exec"), settings)
            continue
        name, equals, text = arg[2:].partition("=")
        if not equals:
            raise SystemExit(f"expected --name=value, got {arg}")
        if name not in settings or name.startswith("_"):
            raise SystemExit(f"--{name}: there is no such setting")
        try:
            value = literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        default = settings[name]
        if type(default) is float and type(value) is int:
            value = float(value)
        if type(value) is not type(default):
            raise SystemExit(f"--{name}={text}: expected {type(default).__name__}, got {type(value).__name__}")
        print(f"{name} = {value!r}")
        settings[name] = value


_configure(globals())
del _configure
