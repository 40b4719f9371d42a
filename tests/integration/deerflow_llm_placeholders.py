"""Stand-ins for the LLM libraries DeerFlow's AioSandboxProvider module imports but its sandbox
path never uses (langchain, langchain_core, langchain_openai, langgraph: on no registry CI can
reach). Importing this module adds a finder behind every real one, so an installed library
still wins. A stand-in is a class with every attribute, subscript and subclass: enough for
DeerFlow's import-time code (type hints, decorators, base classes). Once arm() is called, calling
any stand-in raises, naming it: the driver arms it right after the import, so a sandbox path
that reached into the LLM libraries fails at that spot instead of working on a fake."""
import importlib.abc
import importlib.machinery
import sys
import types

NAMES = ("langchain", "langchain_core", "langchain_openai", "langgraph")
placed = []  # the modules that got a stand-in
_armed = False


class _Standin(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _standin(cls.__qualname__ + "." + name)

    def __call__(cls, *args, **kwargs):
        if _armed:
            raise AssertionError("the sandbox path called %s, an LLM library stand-in" % cls.__qualname__)
        return _standin(cls.__qualname__ + "()")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())


def _standin(name):
    return _Standin(name.rsplit(".", 1)[-1], (), {"__qualname__": name})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _standin(self.__name__ + "." + name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in NAMES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        placed.append(spec.name)
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def arm():
    global _armed
    _armed = True


sys.meta_path.append(_Finder())
